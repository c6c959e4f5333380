// edgestr/client: the client library for programs talking to an edgestr deployment.
export {};
