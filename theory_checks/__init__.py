"""Constants, step sizes and predicted rates, checked against runs."""
