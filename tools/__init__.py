"""Shipped inside the ringcast package as ringcast._bundled.tools (see setup.py); ``ringcast spec``
and the trace checker import its TLC driver, ``tlc.py``."""
