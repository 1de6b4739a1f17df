"""sim: the fleet twin"""
