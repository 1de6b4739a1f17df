"""bench: layer 3 measured"""
