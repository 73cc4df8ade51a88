"""Kubernetes backend of jupyter-nbvalidation.

``manifests/`` ships inside the package (so it is in the wheel):

- ``crd.yaml``: the NotebookValidationJob CRD (nbvalidation.dev/v1alpha1);
- ``role.yaml``: the least-privilege Role the server needs in its namespace;
- ``rolebinding-example.yaml``: a ServiceAccount + RoleBinding example.
"""

from pathlib import Path

MANIFESTS_DIR = Path(__file__).with_name("manifests")
