"""The built-in example jobs (dedup + windows, sessions, a stream-stream join, custom state), defined as any
user's job is, and their transformations. The runtime never imports them."""
