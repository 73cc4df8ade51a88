"""The kinds of file a repository declares its environment in, one module each (discovery.py lists them in order)."""
