"""What every way of handling a delivery shares: the receive's core, on a floor of its own.

The delivery and the receiver's dependencies (`types`), the job a body asks for (`models`), the pure
decision (`decision`), an attempt's start and end (`attempt`), the dead-letter queue (`dlq`), the
copies a message is sent again as, to wait for its job id or parked (`copies`), and the batch's
read-ahead (`read_ahead`). The receiver, admission and cancel stand on it and import it; it imports
none of them."""
