"""A loopback webhook for the alert tests: records every POST, answers with the statuses it is given."""
import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


class Server:
    """A loopback HTTP server answering each POST with the next status of `statuses` (the last one repeats);
    `gate`, when given, holds every answer until it is set."""

    def __init__(self, statuses, gate: threading.Event | None = None):
        self.statuses, self.gate, self.bodies = list(statuses), gate, []
        server = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):
                body = self.rfile.read(int(self.headers["Content-Length"]))
                server.bodies.append((self.headers["Content-Type"], json.loads(body)))
                if server.gate is not None:
                    server.gate.wait(30)
                status = server.statuses.pop(0) if len(server.statuses) > 1 else server.statuses[0]
                self.send_response(status)
                self.end_headers()

            def log_message(self, *args):
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/hook"
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def close(self):
        self.httpd.shutdown()
        self.httpd.server_close()
