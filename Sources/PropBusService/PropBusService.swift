// Exports the core model over D-Bus.
