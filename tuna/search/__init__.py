"""Search strategies (evolution strategies) and the one place tuna starts processes (issue 5)."""
