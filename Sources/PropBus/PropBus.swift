// Core model of propbus; see Keys/, Properties/, Store/.
