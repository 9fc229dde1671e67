"""Shipped inside the ringcast package as ringcast._bundled.spec (see setup.py); not imported as code."""
