"""observability: layer 4"""
