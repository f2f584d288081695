"""Running episodes: the episode loop and the grid of a run."""
