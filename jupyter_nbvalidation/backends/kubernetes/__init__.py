"""Kubernetes backend of jupyter-nbvalidation.

``manifests/`` ships inside the package (so it is in the wheel):

- ``crd.yaml``: the NotebookValidationJob CRD (nbvalidation.dev/v1alpha1);
- ``schedule-crd.yaml``: the NotebookValidationSchedule CRD (``kubectl get nvs``);
- ``role.yaml``: the least-privilege Role the server needs in its namespace;
- ``rolebinding-example.yaml``: a ServiceAccount + RoleBinding example;
- ``networkpolicy.yaml``: the NetworkPolicy that keeps validation Pods from the API server,
  the service and each other (no ingress; egress to DNS and the outside only).
"""

from pathlib import Path

MANIFESTS_DIR = Path(__file__).with_name("manifests")
#: the name of the NetworkPolicy in networkpolicy.yaml
NETWORK_POLICY = "nbvalidation-validation-pods"
#: said wherever the policy is: the API accepts it whether or not anything enforces it
NETWORK_POLICY_NOTE = ("the NetworkPolicy is enforced only where the cluster's network plugin implements "
                       "NetworkPolicy (Calico, Cilium, ...); with one that does not (e.g. the plain bridge CNI) "
                       "the validation Pods are not isolated from the API server, the service and each other")
