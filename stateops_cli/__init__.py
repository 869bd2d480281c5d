"""The command line (`stateops`): one module per command group, main.py composes them."""
