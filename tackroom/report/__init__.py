"""Terminal tables and the HTML report."""
