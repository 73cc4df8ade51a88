# Throw-away certificates and kubeconfigs of the cluster (sourced by up.sh).
# One CA signs everything; the service-account key pair is separate.
pki() {
  local d="$STATE/pki"
  [[ -f "$d/.done" ]] && return 0
  rm -rf "$d"; mkdir -p "$d"; chmod 700 "$d"
  ( cd "$d"
    openssl req -x509 -newkey rsa:2048 -nodes -keyout ca.key -out ca.crt -days 30 -subj "/CN=nbv-cluster-ca" 2>/dev/null
    openssl genrsa -out sa.key 2048 2>/dev/null
    openssl rsa -in sa.key -pubout -out sa.pub 2>/dev/null
    cert() { # name subject [san]
      local ext=""
      openssl req -newkey rsa:2048 -nodes -keyout "$1.key" -out "$1.csr" -subj "$2" 2>/dev/null
      if [[ -n "${3:-}" ]]; then printf 'subjectAltName=%s\n' "$3" > "$1.ext"; ext="-extfile $1.ext"; fi
      # shellcheck disable=SC2086
      openssl x509 -req -in "$1.csr" -CA ca.crt -CAkey ca.key -CAcreateserial -days 30 -out "$1.crt" $ext 2>/dev/null
      rm -f "$1.csr" "$1.ext"
    }
    cert apiserver "/CN=kube-apiserver" "DNS:localhost,DNS:kubernetes,DNS:kubernetes.default,DNS:kubernetes.default.svc,IP:127.0.0.1,IP:10.0.0.1"
    cert admin "/O=system:masters/CN=nbv-admin"
    cert apiserver-kubelet-client "/O=system:masters/CN=kube-apiserver-kubelet-client"
    cert kubelet "/O=system:nodes/CN=system:node:localhost"
    cert kubelet-serving "/CN=localhost" "DNS:localhost,IP:127.0.0.1"
    cert kcm "/O=system:masters/CN=system:kube-controller-manager"
    cert scheduler "/CN=system:kube-scheduler"
    kubeconfig() { # name
      cat > "$1.kubeconfig" <<KC
apiVersion: v1
kind: Config
clusters:
- name: nbv
  cluster: {server: "https://127.0.0.1:$APISERVER_PORT", certificate-authority: "$d/ca.crt"}
users:
- name: $1
  user: {client-certificate: "$d/$1.crt", client-key: "$d/$1.key"}
contexts:
- name: nbv
  context: {cluster: nbv, user: $1, namespace: $NAMESPACE}
current-context: nbv
KC
    }
    for n in admin kubelet kcm scheduler; do kubeconfig "$n"; done
    touch .done )
}
