"""Stage 8: go or no-go. Policies say what blocks, the decision applies them (with overrides),
and scheduler actions drain or resume nodes."""
