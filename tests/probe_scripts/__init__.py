"""Training scripts the probe tests run as they are, unmodified: they know nothing of Cockpit."""
