"""Shipped inside the lab package as ringcast_lab._bundled.spec (see lab/setup.py); not imported as code."""
