"""fmstack: plan, measure, launch, observe and simulate foundation-model training and inference."""

__version__ = "0.1.0"
