"""What the DVC stages call: params loading and validation, and the logic of each track."""
