from sparkmill.pipeline import Pipeline

__all__ = ["Pipeline"]
