"""Shipped inside the ringcast package as ringcast._bundled.tools (see setup.py); not imported as code."""
