"""The generated pages: one module per page (leaderboard, report, prior, bench, history) and their figures."""
