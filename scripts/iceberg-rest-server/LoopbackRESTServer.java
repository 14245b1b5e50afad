package org.apache.iceberg.rest;

import java.util.HashMap;
import java.util.Locale;
import java.util.Map;
import org.apache.hadoop.conf.Configuration;
import org.apache.iceberg.CatalogUtil;
import org.apache.iceberg.catalog.Catalog;
import org.eclipse.jetty.server.Server;
import org.eclipse.jetty.server.ServerConnector;
import org.eclipse.jetty.server.handler.gzip.GzipHandler;
import org.eclipse.jetty.servlet.ServletContextHandler;
import org.eclipse.jetty.servlet.ServletHolder;

/**
 * The Iceberg project's REST catalog server (iceberg-open-api's test fixture: its
 * RESTServerCatalogAdapter over iceberg-core's RESTCatalogServlet, as RESTCatalogServer wires
 * them) listening on 127.0.0.1 only: RESTCatalogServer itself binds every interface. Catalog
 * properties come from CATALOG_* variables as RESTCatalogServer reads them (CATALOG_S3_ENDPOINT
 * is s3.endpoint, a double underscore a dash); the port is the first argument.
 */
public class LoopbackRESTServer {
  public static void main(String[] args) throws Exception {
    int port = Integer.parseInt(args[0]);
    Map<String, String> props = new HashMap<>();
    System.getenv().forEach((key, value) -> {
      if (key.startsWith("CATALOG_")) {
        props.put(key.substring(8).replace("__", "-").replace("_", ".").toLowerCase(Locale.ROOT), value);
      }
    });
    Catalog catalog = CatalogUtil.buildIcebergCatalog("rest_backend", props, new Configuration());
    RESTCatalogAdapter adapter =
        new RESTServerCatalogAdapter(new RESTCatalogServer.CatalogContext(catalog, props));
    ServletContextHandler context = new ServletContextHandler(ServletContextHandler.NO_SESSIONS);
    context.addServlet(new ServletHolder(new RESTCatalogServlet(adapter)), "/*");
    context.insertHandler(new GzipHandler());
    Server server = new Server();
    ServerConnector connector = new ServerConnector(server);
    connector.setHost("127.0.0.1");
    connector.setPort(port);
    server.addConnector(connector);
    server.setHandler(context);
    server.start();
    server.join();
  }
}
