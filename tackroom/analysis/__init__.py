"""Turning episode records into numbers: success, intervals, ceilings, mismatch."""
