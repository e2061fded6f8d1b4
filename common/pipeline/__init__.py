"""The pipeline contract both sides share: the chain plan, recorded expressions, collect results."""
