"""Shipped inside the ringcast package as ringcast._bundled.tools (see setup.py). The TLC driver
itself is the package's library, :mod:`ringcast.tlc`; ``tlc.py`` here is its command line over
the checkout's spec/."""
