"""DePIN Mesh provider agent."""
