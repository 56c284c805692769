"""The embedded backend: PyTorch on CPUs (``TorchEngine``)."""
