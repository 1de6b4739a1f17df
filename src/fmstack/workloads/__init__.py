"""workloads: real PyTorch reference jobs"""
