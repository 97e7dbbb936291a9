"""Skill: Multi-Step Workflows. Mechanic: ordered pipeline where each step needs an id produced by the previous one (find, check stock, reserve, invoice, pay, ship). Order fulfilment."""
import random

CATEGORIES = {"desk lamp": ["Lumo", "Arc", "Beam", "Glow"], "office chair": ["Ergo", "Perch", "Sway", "Base"],
              "keyboard": ["Clack", "Type", "Quill", "Key"], "monitor": ["View", "Pane", "Vista", "Frame"]}


class OrderFulfillmentEnv(ToolUseEnv):
    SCENARIO = "You run order fulfilment for an office-supply shop. Prices are in dollars."
    TOOLS = [
        {"type": "function", "function": {
            "name": "find_customer", "description": "Look up a customer by full name: id and address on file.",
            "parameters": {"type": "object", "properties": {"name": {"type": "string"}}, "required": ["name"]}}},
        {"type": "function", "function": {
            "name": "search_catalog", "description": "Products in a category: sku, name, unit price.",
            "parameters": {"type": "object", "properties": {"category": {"type": "string", "enum": sorted(CATEGORIES)}},
                           "required": ["category"]}}},
        {"type": "function", "function": {
            "name": "check_stock", "description": "Units in stock for a sku.",
            "parameters": {"type": "object", "properties": {"sku": {"type": "string"}}, "required": ["sku"]}}},
        {"type": "function", "function": {
            "name": "reserve", "description": "Reserve units of a sku for a customer; returns a reservation id.",
            "parameters": {"type": "object", "properties": {
                "sku": {"type": "string"}, "quantity": {"type": "integer"}, "customer_id": {"type": "string"}},
                "required": ["sku", "quantity", "customer_id"]}}},
        {"type": "function", "function": {
            "name": "create_invoice", "description": "Create the invoice for a reservation; returns id and amount due.",
            "parameters": {"type": "object", "properties": {"reservation_id": {"type": "string"}}, "required": ["reservation_id"]}}},
        {"type": "function", "function": {
            "name": "pay_invoice", "description": "Pay an invoice; the amount must equal the amount due.",
            "parameters": {"type": "object", "properties": {"invoice_id": {"type": "string"}, "amount": {"type": "number"}},
                           "required": ["invoice_id", "amount"]}}},
        {"type": "function", "function": {
            "name": "ship", "description": "Ship a paid reservation to an address.",
            "parameters": {"type": "object", "properties": {"reservation_id": {"type": "string"}, "address": {"type": "string"}},
                           "required": ["reservation_id", "address"]}}},
    ]

    def setup(self, rng):
        skus, prices = rng.sample(range(100, 1000), 16), rng.sample(range(15, 251), 16)  # distinct prices: no ties
        catalog = {}
        for category, brands in CATEGORIES.items():
            for brand in brands:
                catalog[f"SKU-{skus[len(catalog)]}"] = {"name": f"{brand} {category}", "category": category,
                                                        "price": prices[len(catalog)], "stock": rng.randint(0, 12)}
        people = rng.sample(["Nora Diaz", "Ravi Shah", "Ines Costa", "Ken Ito"], 3)
        streets = rng.sample(["Elm St", "Bay Rd", "Mill Ln", "Oak Ave", "Pier Way"], 3)
        customers = {f"C-{rng.randint(1000, 9999)}": {"name": p, "address": f"{rng.randint(2, 99)} {s}"}
                     for p, s in zip(people, streets)}
        category, qty = rng.choice(sorted(CATEGORIES)), rng.randint(3, 6)
        items = sorted((s for s in catalog if catalog[s]["category"] == category), key=lambda s: catalog[s]["price"])
        catalog[items[0]]["stock"] = rng.randint(0, qty - 1)  # the cheapest one is short of stock
        catalog[items[-1]]["stock"] = max(catalog[items[-1]]["stock"], qty)
        target = next(s for s in items if catalog[s]["stock"] >= qty)
        cid = sorted(customers)[0]
        who, address = customers[cid]["name"], customers[cid]["address"]
        self._state = {"catalog": catalog, "customers": customers, "reservations": {}, "invoices": {}, "shipments": []}

        def reservation():  # the reservation that fulfils the request, if made
            return next((r for r, v in self._state["reservations"].items()
                         if (v["sku"], v["quantity"], v["customer_id"]) == (target, qty, cid)), None)

        def invoice():
            return next((i for i, v in self._state["invoices"].items() if v["reservation_id"] == reservation()), None)

        def reserve_next():
            if not self.called("find_customer", name=who):
                return "find_customer", {"name": who}
            if not self.called("search_catalog", category=category):
                return "search_catalog", {"category": category}
            for sku in items:  # cheapest first, until one has enough stock
                if not self.called("check_stock", sku=sku):
                    return "check_stock", {"sku": sku}
                if sku == target:
                    return "reserve", {"sku": sku, "quantity": qty, "customer_id": cid}

        return [
            {"text": f"{who} wants {qty} units of the cheapest {category} that has at least {qty} in stock. Reserve them.",
             "check": lambda: reservation() is not None, "next_call": reserve_next},
            {"text": "Create the invoice for that reservation.",
             "check": lambda: invoice() is not None,
             "next_call": lambda: ("create_invoice", {"reservation_id": reservation()})},
            {"text": "Pay the invoice with the exact amount due.",
             "check": lambda: invoice() is not None and self._state["invoices"][invoice()]["paid"],
             "next_call": lambda: ("pay_invoice", {"invoice_id": invoice(), "amount": self._state["invoices"][invoice()]["amount"]})},
            {"text": f"Ship the order to {who}'s address on file.",
             "check": lambda: {"reservation_id": reservation(), "address": address} in self._state["shipments"],
             "next_call": lambda: ("ship", {"reservation_id": reservation(), "address": address})},
        ]

    def tool_find_customer(self, name):
        for cid, info in self._state["customers"].items():
            if info["name"].lower() == name.strip().lower():
                return {"customer_id": cid, "address": info["address"]}
        raise ValueError(f"no customer named '{name}'")

    def tool_search_catalog(self, category):
        return [{"sku": s, "name": v["name"], "price": v["price"]} for s, v in self._state["catalog"].items() if v["category"] == category]

    def tool_check_stock(self, sku):
        if sku not in self._state["catalog"]:
            raise ValueError(f"unknown sku '{sku}'")
        return {"sku": sku, "in_stock": self._state["catalog"][sku]["stock"]}

    def tool_reserve(self, sku, quantity, customer_id):
        item = self._state["catalog"].get(sku)
        if item is None or customer_id not in self._state["customers"]:
            raise ValueError("unknown sku or customer id")
        if not 1 <= quantity <= item["stock"]:
            raise ValueError(f"cannot reserve {quantity}: {item['stock']} in stock")
        item["stock"] -= quantity
        rid = f"R-{len(self._state['reservations']) + 1}"
        self._state["reservations"][rid] = {"sku": sku, "quantity": quantity, "customer_id": customer_id}
        return {"reservation_id": rid}

    def tool_create_invoice(self, reservation_id):
        res = self._state["reservations"].get(reservation_id)
        if res is None:
            raise ValueError(f"no reservation '{reservation_id}'")
        if any(v["reservation_id"] == reservation_id for v in self._state["invoices"].values()):
            raise ValueError(f"{reservation_id} already has an invoice")
        iid = f"INV-{len(self._state['invoices']) + 1}"
        amount = res["quantity"] * self._state["catalog"][res["sku"]]["price"]
        self._state["invoices"][iid] = {"reservation_id": reservation_id, "amount": amount, "paid": False}
        return {"invoice_id": iid, "amount_due": amount}

    def tool_pay_invoice(self, invoice_id, amount):
        inv = self._state["invoices"].get(invoice_id)
        if inv is None or inv["paid"]:
            raise ValueError(f"no unpaid invoice '{invoice_id}'")
        if abs(amount - inv["amount"]) > 1e-9:
            raise ValueError(f"amount must equal the amount due, {inv['amount']}")
        inv["paid"] = True
        return {"invoice_id": invoice_id, "status": "paid"}

    def tool_ship(self, reservation_id, address):
        if not any(v["reservation_id"] == reservation_id and v["paid"] for v in self._state["invoices"].values()):
            raise ValueError(f"{reservation_id} has no paid invoice")
        self._state["shipments"].append({"reservation_id": reservation_id, "address": address})
        return {"status": "shipped", "reservation_id": reservation_id}
