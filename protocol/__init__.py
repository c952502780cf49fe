"""What the service, the provider agent and the `mesh` tools share, and nothing else: request
signing (EIP-712), the signed HTTP client and its errors, the wallet keystore, and the image
codecs results travel in. It imports nothing of the project."""
