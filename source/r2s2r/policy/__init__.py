"""Policies: what maps an observation to a chunk of actions (``base.Policy``), learned or
scripted (``plan.PlanPolicy`` follows a generated plan)."""
