"""Explain a key: is it in state at a batch, where, with which value, and why has it not been emitted?

The debugging story of Spark's State Reader API, for one key value. `evidence` gathers what the checkpoint,
the progress table, the input and the output say (Spark); `verdict` judges it with a table of pure rules per
kind of state (join, window, session, custom). Reasons: `REASONS`.
"""
from stateops.explain.explainer import explain_key, resolve_batch
from stateops.explain.model import (KINDS, REASONS, Evidence, ExplainError, ExplainTarget, InputSource, JoinSpec,
                                    KeyExplanation)

__all__ = ["KINDS", "REASONS", "Evidence", "ExplainError", "ExplainTarget", "InputSource", "JoinSpec",
           "KeyExplanation", "explain_key", "resolve_batch"]
