// Package gatewayapi translates the Gateway API objects tollgate serves into
// what the gateways load and what the objects' statuses say, with pure
// functions and no client: Translate takes the GatewayClasses, Gateways,
// HTTPRoutes, Services, EndpointSlices, ReferenceGrants, namespaces and the
// certificate Secrets of one pass (Input) and returns the route table
// (pkg/routetable) with every listener's, Gateway's and route's conditions
// (Output). ClassStatus, Output.GatewayStatus and Output.RouteParents turn
// those into the status each object should have.
//
// The controllers package watches and lists the objects, reads the Secrets,
// publishes the table and the TLS Secret, and writes the statuses that
// changed; nothing here talks to the API server, so every rule of the
// Gateway API specification tollgate implements is a unit test of this
// package.
package gatewayapi
