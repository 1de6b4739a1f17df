"""orchestration: layer 2"""
