"""The ``kubernetes`` infra (``k8s``): kubeconfig contexts are regions, a cluster is one pod
per node plus a headless service, node agents run in the pods and are reached through the
Kubernetes API itself (``skyd.transports.kube``). See docs/kubernetes.md."""
