"""A team's validation service behind JupyterHub: the service (``jupyter nbvalidation service``:
the REST API and the reconciler as a Hub service, every request authenticated with the Hub),
what the Hub's configuration needs (``hub-config``), its metrics, and the user servers' side
(forward.py, upload.py: a user's server forwards its REST routes to the service)."""
