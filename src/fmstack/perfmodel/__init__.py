"""perfmodel: layer 3 as a model"""
