"""What comes after an engine has run: predictive mixtures over posterior draws and ArviZ conversion with GP dims."""
