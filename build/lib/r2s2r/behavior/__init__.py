"""Behavior: turning task instances into command sequences (adapted real demonstrations),
executing them in simulation and keeping the successes."""
