"""Evaluation: the trial protocol, the trial runner, the trial logs, their statistics, the
latent-space analysis and the report."""
