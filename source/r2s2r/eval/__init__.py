"""Evaluation: the trial protocol, trial runner, statistics, latent-space analysis and
report."""
