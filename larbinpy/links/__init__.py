"""From a page to the URLs worth crawling: link extraction, URL resolution and normalisation,
the crawl's scope, and sitemaps."""
