import PropBus

extension PropertyModel {
    /// Ends the model's round into `store` as the service does (``Round/end()``): commits its
    /// ``WriteSet``, or rolls the round back and throws the store's refusal.
    func commit(to store: PropertyStore) throws {
        if let rollback = Round(model: self, commands: nil, store: store).end() { throw rollback.error }
    }
}
