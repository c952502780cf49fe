"""The only package that talks to the chain (web3). Other packages use its views and SDK."""
