"""Analysis: sweeps, plans, what-ifs, validation against measurements and calibration; built on `scenario`."""
