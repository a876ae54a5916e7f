"""The shared base of the providers whose nodes are VMs (or pods, or bare-metal servers)
reached over SSH: skyd's VM key, waiting for sshd, deploying the node agent
(:mod:`skyd.clouds.vm.nodes`), and the one-machine-per-node provisioning flow
(:class:`skyd.clouds.vm.provisioner.VMProvisioner`). GCP uses the first; RunPod, Vultr,
Hot Aisle, DigitalOcean/AMD Developer Cloud and Crusoe use both."""
