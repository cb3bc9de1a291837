<?php
/**
 * Switches the companion plugin on the running test site, so the gateway's "no plugin" case
 * and the plugin's own lifecycle are tested against a real WordPress (see companion.sh).
 *
 * Usage: php companion.php WORDPRESS_DIR on|off|status|uninstall [--queries]
 *   on         activate (runs the activation hook: the lookup index)
 *   off        deactivate (the index and its option stay)
 *   uninstall  deactivate, then uninstall as Plugins → Delete does (uninstall.php), files kept
 * Prints "active" or "inactive"; with --queries, a JSON object instead:
 * {"state": "active", "queries": [the SQL statements the switch itself ran, in order]}
 * (SAVEQUERIES: the statements of loading WordPress are left out).
 */

$pgw_actions = array( 'on', 'off', 'status', 'uninstall' );
if ( $argc < 3 || ! in_array( $argv[2], $pgw_actions, true ) ) {
	fwrite( STDERR, "usage: php companion.php WORDPRESS_DIR on|off|status|uninstall [--queries]\n" );
	exit( 2 );
}
$pgw_queries = in_array( '--queries', array_slice( $argv, 3 ), true );
if ( $pgw_queries ) {
	define( 'SAVEQUERIES', true );
}
$_SERVER['HTTP_HOST']       = 'localhost';
$_SERVER['REQUEST_METHOD']  = 'GET';
$_SERVER['SERVER_PROTOCOL'] = 'HTTP/1.1';
define( 'WP_ADMIN', true );
require $argv[1] . '/wp-load.php';
require_once ABSPATH . 'wp-admin/includes/plugin.php';

global $wpdb;
$pgw_before = is_array( $wpdb->queries ) ? count( $wpdb->queries ) : 0;
$plugin     = 'publishing-gateway-companion/publishing-gateway-companion.php';
if ( 'on' === $argv[2] && ! is_plugin_active( $plugin ) ) {
	$result = activate_plugin( $plugin );
	if ( is_wp_error( $result ) ) {
		fwrite( STDERR, $result->get_error_message() . "\n" );
		exit( 1 );
	}
} elseif ( 'off' === $argv[2] || 'uninstall' === $argv[2] ) {
	deactivate_plugins( $plugin );
	if ( 'uninstall' === $argv[2] && ! uninstall_plugin( $plugin ) ) {
		fwrite( STDERR, "the plugin has no uninstall.php or uninstall hook\n" );
		exit( 1 );
	}
}
$pgw_state = is_plugin_active( $plugin ) ? 'active' : 'inactive';
if ( ! $pgw_queries ) {
	echo $pgw_state, "\n";
	exit( 0 );
}
$pgw_run = array();
foreach ( array_slice( (array) $wpdb->queries, $pgw_before ) as $pgw_query ) {
	$pgw_run[] = trim( preg_replace( '/\s+/', ' ', $pgw_query[0] ) );
}
echo json_encode( array( 'state' => $pgw_state, 'queries' => $pgw_run ) ), "\n";
