"""The compliance stage: EU AI Act documentation generated from the run's own records (issue 7)."""
