<?php
/**
 * Deactivates or reactivates the companion plugin on the running test site, so the gateway's
 * "no plugin" case is tested against a real WordPress (see companion.sh).
 *
 * Usage: php companion.php WORDPRESS_DIR on|off|status   (prints "active" or "inactive")
 */

if ( $argc < 3 || ! in_array( $argv[2], array( 'on', 'off', 'status' ), true ) ) {
	fwrite( STDERR, "usage: php companion.php WORDPRESS_DIR on|off|status\n" );
	exit( 2 );
}
$_SERVER['HTTP_HOST']       = 'localhost';
$_SERVER['REQUEST_METHOD']  = 'GET';
$_SERVER['SERVER_PROTOCOL'] = 'HTTP/1.1';
define( 'WP_ADMIN', true );
require $argv[1] . '/wp-load.php';
require_once ABSPATH . 'wp-admin/includes/plugin.php';

$plugin = 'publishing-gateway-companion/publishing-gateway-companion.php';
if ( 'on' === $argv[2] && ! is_plugin_active( $plugin ) ) {
	$result = activate_plugin( $plugin );
	if ( is_wp_error( $result ) ) {
		fwrite( STDERR, $result->get_error_message() . "\n" );
		exit( 1 );
	}
} elseif ( 'off' === $argv[2] ) {
	deactivate_plugins( $plugin );
}
echo is_plugin_active( $plugin ) ? "active\n" : "inactive\n";
