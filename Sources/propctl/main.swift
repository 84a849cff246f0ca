print("propctl")
