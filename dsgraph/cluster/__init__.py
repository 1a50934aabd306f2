"""Cluster: process launch, supervision and DGL compatibility fixes."""
