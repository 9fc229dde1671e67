"""Shipped inside the ringcast package as ringcast._bundled.stress (see setup.py); not imported as code."""
