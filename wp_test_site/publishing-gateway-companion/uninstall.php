<?php
/**
 * Uninstall (Plugins → Delete, or uninstall_plugin()): removes what the plugin added to the
 * database, the postmeta lookup index and its option, on every site of a network. The objects'
 * operation-key meta stays: it is the gateway's record of what it wrote, not the plugin's.
 *
 * The two names repeat PGW_Companion::KEY_INDEX and ::KEY_INDEX_OPTION: WordPress runs this
 * file without loading the plugin.
 *
 * @package publishing-gateway-companion
 */

if ( ! defined( 'WP_UNINSTALL_PLUGIN' ) ) {
	exit;
}

/**
 * Drop the index (when present) and the option of the current site.
 */
function pgw_companion_uninstall_site() {
	global $wpdb;
	$index = 'pgw_operation_key';
	// phpcs:ignore WordPress.DB.DirectDatabaseQuery.DirectQuery,WordPress.DB.DirectDatabaseQuery.NoCaching
	if ( $wpdb->get_var( $wpdb->prepare( "SHOW INDEX FROM {$wpdb->postmeta} WHERE Key_name = %s", $index ) ) ) {
		// phpcs:ignore WordPress.DB.DirectDatabaseQuery.SchemaChange,WordPress.DB.DirectDatabaseQuery.DirectQuery,WordPress.DB.DirectDatabaseQuery.NoCaching
		$wpdb->query( "ALTER TABLE {$wpdb->postmeta} DROP INDEX {$index}" );
	}
	delete_option( 'pgw_companion_key_index' );
}

if ( is_multisite() ) {
	foreach ( get_sites( array( 'fields' => 'ids', 'number' => 0 ) ) as $pgw_site_id ) {
		switch_to_blog( $pgw_site_id );
		pgw_companion_uninstall_site();
		restore_current_blog();
	}
} else {
	pgw_companion_uninstall_site();
}
