"""What a run leaves behind: metrics, result files, plots, exports and the HTML report."""
