<?php
/**
 * Plugin Name:       Publishing Gateway Companion
 * Description:       REST support for the publishing gateway: exposes Rank Math SEO meta and a protected operation-key meta over the REST API, refuses duplicate creates carrying an operation key that already exists (safe under concurrency), and adds lookup/status endpoints under publishing-gateway/v1.
 * Version:           1.3.0
 * Requires at least: 5.9
 * Requires PHP:      7.4
 * License:           GPL-2.0-or-later
 * Text Domain:       publishing-gateway-companion
 *
 * Works as a regular plugin (wp-content/plugins/publishing-gateway-companion/)
 * or dropped as a single file into wp-content/mu-plugins/.
 */

if ( ! defined( 'ABSPATH' ) ) {
	exit;
}

// Loaded twice (e.g. both as mu-plugin and regular plugin)? Keep the first copy.
if ( defined( 'PGW_COMPANION_VERSION' ) ) {
	return;
}

define( 'PGW_COMPANION_VERSION', '1.3.0' );

final class PGW_Companion {

	const SLUG            = 'publishing-gateway-companion';
	const VERSION         = PGW_COMPANION_VERSION;
	const REST_NAMESPACE  = 'publishing-gateway/v1';
	const OP_KEY_META     = '_gateway_operation_key';
	// The gateway's XML-RPC transport cannot write protected meta: it stores the same key
	// under this non-protected name. Lookups and the guard know both.
	const XMLRPC_KEY_META = 'gateway_operation_key';
	const LOCK_TIMEOUT    = 15;
	const MAX_LOOKUP_KEYS = 100;
	// An index on postmeta (meta_key, meta_value prefixes) for the lookups by operation key:
	// without it, each guarded write and each lookup scans every row carrying the key
	// (about 0.5 s at 10,000 gateway objects, growing with the site). Made once, on the
	// first request after the plugin is installed or updated (option KEY_INDEX_OPTION).
	const KEY_INDEX        = 'pgw_operation_key';
	const KEY_INDEX_OPTION = 'pgw_companion_key_index';

	/** @var string[] */
	const SEO_META = array( 'rank_math_title', 'rank_math_description', 'rank_math_focus_keyword' );

	/**
	 * Named MySQL locks held by this PHP request, keyed by spl_object_id() of the REST request.
	 *
	 * @var array<int,string>
	 */
	private static $held_locks = array();

	/** @var bool */
	private static $shutdown_registered = false;

	public static function boot() {
		add_action( 'init', array( __CLASS__, 'ensure_key_index' ), 1 );
		add_action( 'init', array( __CLASS__, 'register_meta' ) );
		add_action( 'rest_api_init', array( __CLASS__, 'register_routes' ) );
		// Runs after authentication, route matching, parameter validation and the
		// route's permission_callback, immediately before the endpoint callback
		// (also for each sub-request of a /batch/v1 request).
		add_filter( 'rest_dispatch_request', array( __CLASS__, 'guard_before_callback' ), 10, 4 );
		// Always runs after the callback (or after an error short-circuit).
		add_filter( 'rest_request_after_callbacks', array( __CLASS__, 'release_after_callback' ), 10, 3 );
	}

	/**
	 * Create the postmeta index the lookups by operation key use, once per site: the option
	 * (autoloaded, so checking it costs no query) records that it exists, or that creating
	 * it failed (e.g. no ALTER privilege), in which case it is not tried again until the
	 * option is deleted; lookups stay correct without it, only slower.
	 */
	public static function ensure_key_index() {
		if ( false !== get_option( self::KEY_INDEX_OPTION ) ) {
			return;
		}
		global $wpdb;
		$exists = static function () use ( $wpdb ) {
			return (bool) $wpdb->get_var(
				$wpdb->prepare( "SHOW INDEX FROM {$wpdb->postmeta} WHERE Key_name = %s", self::KEY_INDEX )
			);
		};
		if ( ! $exists() ) {
			// meta_key(32) + meta_value(96) in utf8mb4 stays under every row format's 767 bytes;
			// the WHERE clause still compares the whole value.
			$wpdb->query(
				'ALTER TABLE ' . $wpdb->postmeta . ' ADD INDEX ' . self::KEY_INDEX . ' (meta_key(32), meta_value(96))'
			);
		}
		update_option( self::KEY_INDEX_OPTION, $exists() ? 'present' : 'failed', true );
	}

	/**
	 * Post types that carry the operation key (and get the duplicate guard).
	 *
	 * @return string[]
	 */
	public static function operation_key_post_types() {
		$types = apply_filters( 'publishing_gateway_companion_post_types', array( 'post', 'attachment' ) );
		return array_values( array_unique( array_filter( array_map( 'strval', (array) $types ) ) ) );
	}

	/**
	 * Post types that get the Rank Math SEO meta.
	 *
	 * @return string[]
	 */
	public static function seo_post_types() {
		$types = apply_filters( 'publishing_gateway_companion_seo_post_types', array( 'post' ) );
		return array_values( array_unique( array_filter( array_map( 'strval', (array) $types ) ) ) );
	}

	public static function can_edit_object( $allowed, $meta_key, $object_id ) {
		return current_user_can( 'edit_post', (int) $object_id );
	}

	public static function register_meta() {
		foreach ( self::seo_post_types() as $post_type ) {
			foreach ( self::SEO_META as $meta_key ) {
				register_post_meta(
					$post_type,
					$meta_key,
					array(
						'type'          => 'string',
						'single'        => true,
						'show_in_rest'  => true,
						'auth_callback' => array( __CLASS__, 'can_edit_object' ),
					)
				);
			}
		}
		foreach ( self::operation_key_post_types() as $post_type ) {
			register_post_meta(
				$post_type,
				self::OP_KEY_META,
				array(
					'type'          => 'string',
					'single'        => true,
					'show_in_rest'  => true,
					'description'   => 'Idempotency key of the publishing-gateway operation that created this object.',
					'auth_callback' => array( __CLASS__, 'can_edit_object' ),
				)
			);
		}
	}

	/* ------------------------------------------------------------------ */
	/* Duplicate guard                                                     */
	/* ------------------------------------------------------------------ */

	/**
	 * If the request is a create (or update) on a guarded post type and carries
	 * meta[_gateway_operation_key], serialize on a MySQL named lock for that key
	 * and refuse with 409 when another object already carries it.
	 *
	 * @param mixed           $dispatch_result Null unless something already short-circuited.
	 * @param WP_REST_Request $request
	 * @param string          $route
	 * @param array           $handler
	 * @return mixed
	 */
	public static function guard_before_callback( $dispatch_result, $request, $route, $handler ) {
		if ( null !== $dispatch_result ) {
			return $dispatch_result;
		}

		$target = self::guarded_target( $request, $handler );
		if ( null === $target ) {
			return $dispatch_result;
		}

		$meta = $request->get_param( 'meta' );
		if ( ! is_array( $meta ) || ! isset( $meta[ self::OP_KEY_META ] ) || ! is_scalar( $meta[ self::OP_KEY_META ] ) ) {
			return $dispatch_result;
		}
		$key = (string) $meta[ self::OP_KEY_META ];
		if ( '' === $key ) {
			return $dispatch_result;
		}

		global $wpdb;
		$lock = self::lock_name( $key );
		$got  = $wpdb->get_var( $wpdb->prepare( 'SELECT GET_LOCK(%s, %d)', $lock, self::LOCK_TIMEOUT ) );
		if ( '1' !== (string) $got ) {
			return new WP_Error(
				'gateway_lock_timeout',
				'Could not obtain the operation-key lock; try again.',
				array(
					'status'        => 503,
					'operation_key' => $key,
				)
			);
		}

		$existing = self::find_first_object_with_key( $key, $target['exclude_id'] );
		if ( $existing ) {
			$wpdb->query( $wpdb->prepare( 'SELECT RELEASE_LOCK(%s)', $lock ) );
			return new WP_Error(
				'gateway_duplicate_operation',
				'An object with this operation key already exists.',
				array(
					'status'        => 409,
					'existing_id'   => (int) $existing->ID,
					'existing_type' => $existing->post_type,
					'operation_key' => $key,
				)
			);
		}

		// Keep the lock until the object (and its meta) has been written.
		self::$held_locks[ spl_object_id( $request ) ] = $lock;
		if ( ! self::$shutdown_registered ) {
			self::$shutdown_registered = true;
			register_shutdown_function( array( __CLASS__, 'release_all_locks' ) );
		}
		return $dispatch_result;
	}

	public static function release_after_callback( $response, $handler, $request ) {
		if ( $request instanceof WP_REST_Request ) {
			$id = spl_object_id( $request );
			if ( isset( self::$held_locks[ $id ] ) ) {
				$lock = self::$held_locks[ $id ];
				unset( self::$held_locks[ $id ] );
				self::release_lock( $lock );
			}
		}
		return $response;
	}

	public static function release_all_locks() {
		$locks            = self::$held_locks;
		self::$held_locks = array();
		foreach ( $locks as $lock ) {
			self::release_lock( $lock );
		}
	}

	private static function release_lock( $lock ) {
		global $wpdb;
		if ( $wpdb ) {
			$wpdb->query( $wpdb->prepare( 'SELECT RELEASE_LOCK(%s)', $lock ) );
		}
	}

	private static function lock_name( $key ) {
		return 'pgw:' . md5( $key );
	}

	/**
	 * Decide whether the matched handler is a create/update of a guarded post type.
	 *
	 * @return array{post_type:string,exclude_id:int}|null
	 */
	private static function guarded_target( $request, $handler ) {
		if ( ! $request instanceof WP_REST_Request || empty( $handler['callback'] ) || ! is_array( $handler['callback'] ) ) {
			return null;
		}
		list( $controller, $method ) = array_values( $handler['callback'] ) + array( null, null );
		if ( ! $controller instanceof WP_REST_Posts_Controller || ! in_array( $method, array( 'create_item', 'update_item' ), true ) ) {
			return null;
		}
		$route = untrailingslashit( (string) $request->get_route() );
		foreach ( self::operation_key_post_types() as $post_type ) {
			$obj = get_post_type_object( $post_type );
			if ( ! $obj || empty( $obj->show_in_rest ) ) {
				continue;
			}
			$namespace = ! empty( $obj->rest_namespace ) ? $obj->rest_namespace : 'wp/v2';
			$base      = ! empty( $obj->rest_base ) ? $obj->rest_base : $obj->name;
			$prefix    = '/' . trim( $namespace, '/' ) . '/' . trim( $base, '/' );
			if ( 'create_item' === $method && 0 === strcasecmp( $route, $prefix ) ) {
				return array(
					'post_type'  => $post_type,
					'exclude_id' => 0,
				);
			}
			if ( 'update_item' === $method && preg_match( '@^' . preg_quote( $prefix, '@' ) . '/(\d+)$@i', $route, $m ) ) {
				return array(
					'post_type'  => $post_type,
					'exclude_id' => (int) $m[1],
				);
			}
		}
		return null;
	}

	/**
	 * @return object|null Row with ID and post_type, any post type and any status.
	 */
	private static function find_first_object_with_key( $key, $exclude_id = 0 ) {
		global $wpdb;
		return $wpdb->get_row(
			$wpdb->prepare(
				"SELECT p.ID, p.post_type
				   FROM {$wpdb->postmeta} pm
				   INNER JOIN {$wpdb->posts} p ON p.ID = pm.post_id
				  WHERE pm.meta_key IN (%s, %s) AND pm.meta_value = %s AND p.ID <> %d
				  ORDER BY p.ID ASC
				  LIMIT 1",
				self::OP_KEY_META,
				self::XMLRPC_KEY_META,
				$key,
				(int) $exclude_id
			)
		);
	}

	/* ------------------------------------------------------------------ */
	/* REST endpoints                                                      */
	/* ------------------------------------------------------------------ */

	public static function register_routes() {
		register_rest_route(
			self::REST_NAMESPACE,
			'/objects',
			array(
				array(
					'methods'             => WP_REST_Server::READABLE,
					'callback'            => array( __CLASS__, 'rest_objects' ),
					'permission_callback' => array( __CLASS__, 'can_use_api' ),
					'args'                => array(
						'keys' => array(
							'description' => 'Comma-separated operation keys (at most 100).',
							'type'        => 'string',
							'required'    => true,
						),
					),
				),
			)
		);
		register_rest_route(
			self::REST_NAMESPACE,
			'/status',
			array(
				array(
					'methods'             => WP_REST_Server::READABLE,
					'callback'            => array( __CLASS__, 'rest_status' ),
					'permission_callback' => array( __CLASS__, 'can_use_api' ),
				),
			)
		);
	}

	public static function can_use_api() {
		return current_user_can( 'edit_posts' );
	}

	public static function rest_status() {
		return rest_ensure_response(
			array(
				'plugin'             => self::SLUG,
				'version'            => self::VERSION,
				'guard'              => true,
				'operation_key_meta' => self::OP_KEY_META,
				'lookup_meta'        => array( self::OP_KEY_META, self::XMLRPC_KEY_META ),
				'seo_meta'           => self::SEO_META,
				'key_index'          => 'present' === get_option( self::KEY_INDEX_OPTION ),
				'wordpress'          => get_bloginfo( 'version' ),
			)
		);
	}

	public static function rest_objects( WP_REST_Request $request ) {
		global $wpdb;

		$keys = array();
		foreach ( explode( ',', (string) $request->get_param( 'keys' ) ) as $k ) {
			$k = trim( $k );
			if ( '' !== $k ) {
				$keys[ $k ] = true;
			}
		}
		$keys = array_keys( $keys );
		$keys = array_map( 'strval', $keys );

		if ( ! $keys ) {
			return new WP_Error( 'rest_invalid_param', 'Parameter keys must contain at least one operation key.', array( 'status' => 400 ) );
		}
		if ( count( $keys ) > self::MAX_LOOKUP_KEYS ) {
			return new WP_Error( 'rest_invalid_param', sprintf( 'At most %d operation keys per request.', self::MAX_LOOKUP_KEYS ), array( 'status' => 400 ) );
		}

		$placeholders = implode( ',', array_fill( 0, count( $keys ), '%s' ) );
		$sql          = "SELECT pm.meta_value AS operation_key, p.ID, p.post_type, p.post_status,
		                        p.post_date, p.post_date_gmt, p.post_modified, p.post_modified_gmt,
		                        p.post_author, p.post_title, p.post_parent
		                   FROM {$wpdb->postmeta} pm
		                   INNER JOIN {$wpdb->posts} p ON p.ID = pm.post_id
		                  WHERE pm.meta_key IN (%s, %s) AND pm.meta_value IN ($placeholders)
		                  ORDER BY p.ID ASC, pm.meta_id ASC";
		// phpcs:ignore WordPress.DB.PreparedSQL.InterpolatedNotPrepared
		$rows = $wpdb->get_results( $wpdb->prepare( $sql, array_merge( array( self::OP_KEY_META, self::XMLRPC_KEY_META ), $keys ) ) );
		if ( $wpdb->last_error ) {
			return new WP_Error( 'gateway_db_error', 'Database error while looking up operation keys.', array( 'status' => 500 ) );
		}

		$objects = array();
		foreach ( (array) $rows as $row ) {
			$objects[] = array(
				'operation_key' => (string) $row->operation_key,
				'id'            => (int) $row->ID,
				'type'          => (string) $row->post_type,
				'status'        => (string) $row->post_status,
				'date_gmt'      => self::gmt_date( $row->post_date_gmt, $row->post_date ),
				'modified_gmt'  => self::gmt_date( $row->post_modified_gmt, $row->post_modified ),
				'author'        => (int) $row->post_author,
				'title'         => (string) $row->post_title,
				'parent'        => (int) $row->post_parent,
			);
		}

		return rest_ensure_response( array( 'objects' => $objects ) );
	}

	/**
	 * Same convention as the core posts controller: unset GMT dates (drafts)
	 * are derived from the local date; result formatted like core ("Y-m-d\TH:i:s").
	 */
	private static function gmt_date( $gmt, $local ) {
		if ( '0000-00-00 00:00:00' === $gmt || '' === (string) $gmt ) {
			if ( '0000-00-00 00:00:00' === $local || '' === (string) $local ) {
				return null;
			}
			$gmt = get_gmt_from_date( $local );
		}
		$formatted = mysql_to_rfc3339( $gmt );
		return $formatted ? $formatted : null;
	}
}

PGW_Companion::boot();
